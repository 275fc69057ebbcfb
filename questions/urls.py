from django.urls import path

from questions import views

app_name = "questions"
urlpatterns = [
    path("<slug:slug>/", views.topic_detail, name="topic"),
]
